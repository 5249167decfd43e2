// Log Analytics + workspace-based Application Insights. Local (instrumentation-key)
// authentication is off: the Function App publishes telemetry as its managed identity
// (APPLICATIONINSIGHTS_AUTHENTICATION_STRING), with Monitoring Metrics Publisher.

param workspaceName string
param appInsightsName string
param location string
param tags object
param publisherPrincipalId string
@description('Days Log Analytics keeps function logs and traces.')
param retentionInDays int = 30

resource workspace 'Microsoft.OperationalInsights/workspaces@2023-09-01' = {
  name: workspaceName
  location: location
  tags: tags
  properties: {
    sku: {
      name: 'PerGB2018'
    }
    retentionInDays: retentionInDays
    features: {
      disableLocalAuth: true
    }
  }
}

resource appInsights 'Microsoft.Insights/components@2020-02-02' = {
  name: appInsightsName
  location: location
  tags: tags
  kind: 'web'
  properties: {
    Application_Type: 'web'
    WorkspaceResourceId: workspace.id
    DisableLocalAuth: true
  }
}

// Monitoring Metrics Publisher, so the identity can send telemetry with local auth off.
resource publisher 'Microsoft.Authorization/roleAssignments@2022-04-01' = {
  name: guid(appInsights.id, publisherPrincipalId, '3913510d-42f4-4e42-8a64-420c390055eb')
  scope: appInsights
  properties: {
    roleDefinitionId: subscriptionResourceId('Microsoft.Authorization/roleDefinitions', '3913510d-42f4-4e42-8a64-420c390055eb')
    principalId: publisherPrincipalId
    principalType: 'ServicePrincipal'
  }
}

output connectionString string = appInsights.properties.ConnectionString
output appInsightsId string = appInsights.id
output workspaceId string = workspace.id
