// The Function App's storage: the Functions host (AzureWebJobsStorage__*, identity-based),
// the turn queue and its poison queue (functions/turns.py), the Flex Consumption deployment
// package, and the audit anchors (append blobs in a container with a time-based retention
// policy that allows appends and forbids rewrites and deletes).
// Shared keys are off: every client authenticates with Entra ID (the managed identity).

param name string
param location string
param tags object
param identityPrincipalId string
@description('Turn queue name: COPILOT_TURN_QUEUE; the poison queue is <name>-poison (the Functions host\'s convention).')
param turnQueueName string
@description('Container of the audit log\'s signed chain-head anchors (append blobs).')
param anchorContainerName string = 'audit-anchors'
@description('Container Flex Consumption deploys the app package from.')
param deploymentContainerName string = 'app-package'
@description('Days an anchor blob is protected from deletion and overwrite (appends stay allowed).')
@minValue(1)
param anchorRetentionDays int = 365
@description('Public endpoint: Disabled unless allowPublicAccess or an admin IP is given (private endpoints reach it).')
param allowPublicAccess bool = false
@description('An admin machine\'s public IP allowed through the firewall (empty = none).')
param adminIpAddress string = ''
@description('Log Analytics workspace the resource\'s diagnostic logs and metrics go to.')
param workspaceId string

var reachable = allowPublicAccess || (!empty(adminIpAddress))

// Storage Blob Data Owner (host leases, deployment package, anchors), Queue Data Contributor
// (turn queues), Table Data Contributor (Functions host state).
var roles = [
  'b7e6dc6d-f1e8-4753-8033-0f276bb0955b'
  '974c5e8b-45b9-4653-ba55-5f855dd0fb88'
  '0a9a7e1f-b9d0-4cc4-a60d-0319b160aaa3'
]

resource account 'Microsoft.Storage/storageAccounts@2023-05-01' = {
  //checkov:skip=CKV_AZURE_206:Replication is a cost choice: the queues hold transient turns and anchors are also re-verifiable from the database; set Standard_GRS or ZRS for production
  //checkov:skip=CKV_AZURE_35:defaultAction is Deny unless allowPublicAccess is passed (checkov cannot evaluate the parameter); tests/infra/test_template_policy.py checks the default
  name: name
  location: location
  tags: tags
  kind: 'StorageV2'
  sku: {
    name: 'Standard_LRS'
  }
  properties: {
    accessTier: 'Hot'
    allowSharedKeyAccess: false
    defaultToOAuthAuthentication: true
    allowBlobPublicAccess: false
    allowCrossTenantReplication: false
    minimumTlsVersion: 'TLS1_2'
    supportsHttpsTrafficOnly: true
    publicNetworkAccess: reachable ? 'Enabled' : 'Disabled'
    networkAcls: {
      bypass: 'AzureServices'
      defaultAction: allowPublicAccess ? 'Allow' : 'Deny'
      ipRules: empty(adminIpAddress) ? [] : [
        {
          value: adminIpAddress
          action: 'Allow'
        }
      ]
    }
  }
}

resource blobService 'Microsoft.Storage/storageAccounts/blobServices@2023-05-01' = {
  parent: account
  name: 'default'
  properties: {
    deleteRetentionPolicy: {
      enabled: true
      days: 7
    }
    containerDeleteRetentionPolicy: {
      enabled: true
      days: 7
    }
  }
}

resource anchors 'Microsoft.Storage/storageAccounts/blobServices/containers@2023-05-01' = {
  parent: blobService
  name: anchorContainerName
  properties: {
    publicAccess: 'None'
  }
}

// Time-based retention with protected append writes: new anchors may be appended to the
// append blob, but no anchor can be rewritten or deleted until the period ends.
resource anchorImmutability 'Microsoft.Storage/storageAccounts/blobServices/containers/immutabilityPolicies@2023-05-01' = {
  parent: anchors
  name: 'default'
  properties: {
    immutabilityPeriodSinceCreationInDays: anchorRetentionDays
    allowProtectedAppendWrites: true
  }
}

resource deployment 'Microsoft.Storage/storageAccounts/blobServices/containers@2023-05-01' = {
  parent: blobService
  name: deploymentContainerName
  properties: {
    publicAccess: 'None'
  }
}

resource queueService 'Microsoft.Storage/storageAccounts/queueServices@2023-05-01' = {
  parent: account
  name: 'default'
}

resource turnQueue 'Microsoft.Storage/storageAccounts/queueServices/queues@2023-05-01' = {
  parent: queueService
  name: turnQueueName
}

resource poisonQueue 'Microsoft.Storage/storageAccounts/queueServices/queues@2023-05-01' = {
  parent: queueService
  name: '${turnQueueName}-poison'
}

resource access 'Microsoft.Authorization/roleAssignments@2022-04-01' = [for role in roles: {
  name: guid(account.id, identityPrincipalId, role)
  scope: account
  properties: {
    roleDefinitionId: subscriptionResourceId('Microsoft.Authorization/roleDefinitions', role)
    principalId: identityPrincipalId
    principalType: 'ServicePrincipal'
  }
}]

// Metrics of the account, and the blob and queue services' logs (reads, writes, deletes: the
// anchors' and the turns'), to Log Analytics.
resource accountDiagnostics 'Microsoft.Insights/diagnosticSettings@2021-05-01-preview' = {
  name: 'to-log-analytics'
  scope: account
  properties: {
    workspaceId: workspaceId
    metrics: [
      {
        category: 'AllMetrics'
        enabled: true
      }
    ]
  }
}

resource blobDiagnostics 'Microsoft.Insights/diagnosticSettings@2021-05-01-preview' = {
  name: 'to-log-analytics'
  scope: blobService
  properties: {
    workspaceId: workspaceId
    logs: [
      {
        categoryGroup: 'allLogs'
        enabled: true
      }
    ]
    metrics: [
      {
        category: 'AllMetrics'
        enabled: true
      }
    ]
  }
}

resource queueDiagnostics 'Microsoft.Insights/diagnosticSettings@2021-05-01-preview' = {
  name: 'to-log-analytics'
  scope: queueService
  properties: {
    workspaceId: workspaceId
    logs: [
      {
        categoryGroup: 'allLogs'
        enabled: true
      }
    ]
    metrics: [
      {
        category: 'AllMetrics'
        enabled: true
      }
    ]
  }
}

output id string = account.id
output name string = account.name
output blobEndpoint string = account.properties.primaryEndpoints.blob
output queueEndpoint string = account.properties.primaryEndpoints.queue
output tableEndpoint string = account.properties.primaryEndpoints.table
output anchorContainerName string = anchorContainerName
output anchorContainerUrl string = '${account.properties.primaryEndpoints.blob}${anchorContainerName}'
output deploymentContainerUrl string = '${account.properties.primaryEndpoints.blob}${deploymentContainerName}'
