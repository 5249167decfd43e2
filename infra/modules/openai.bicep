// Optional Azure OpenAI account and one chat deployment, wired to COPILOT_MODEL
// (azure_openai:<deployment>). The code authenticates with an API key (langchain-openai's
// AZURE_OPENAI_API_KEY), so local auth stays on and the key goes into Key Vault here; the
// managed identity also gets Cognitive Services OpenAI User for a later keyless switch.

param name string
param location string
param tags object
param deploymentName string
param modelName string
param modelVersion string
@description('Thousands of tokens per minute.')
param capacity int = 50
param keyVaultName string
param userPrincipalId string
param allowPublicAccess bool = false
param adminIpAddress string = ''

var reachable = allowPublicAccess || (!empty(adminIpAddress))

resource account 'Microsoft.CognitiveServices/accounts@2024-10-01' = {
  //checkov:skip=CKV_AZURE_236:The copilot's model client (langchain-openai) authenticates with an API key; the key is held in Key Vault and read through a reference
  //checkov:skip=CKV_AZURE_134:publicNetworkAccess is Disabled unless allowPublicAccess or an admin IP is passed (checkov cannot evaluate the expression); tests/infra/test_template_policy.py checks the default
  name: name
  location: location
  tags: tags
  kind: 'OpenAI'
  sku: {
    name: 'S0'
  }
  identity: {
    type: 'SystemAssigned'
  }
  properties: {
    customSubDomainName: name
    disableLocalAuth: false
    publicNetworkAccess: reachable ? 'Enabled' : 'Disabled'
    networkAcls: {
      defaultAction: allowPublicAccess ? 'Allow' : 'Deny'
      ipRules: empty(adminIpAddress) ? [] : [
        {
          value: adminIpAddress
        }
      ]
    }
  }
}

resource chat 'Microsoft.CognitiveServices/accounts/deployments@2024-10-01' = {
  parent: account
  name: deploymentName
  sku: {
    name: 'Standard'
    capacity: capacity
  }
  properties: {
    model: {
      format: 'OpenAI'
      name: modelName
      version: modelVersion
    }
  }
}

resource vault 'Microsoft.KeyVault/vaults@2023-07-01' existing = {
  name: keyVaultName
}

resource apiKey 'Microsoft.KeyVault/vaults/secrets@2023-07-01' = {
  //checkov:skip=CKV_AZURE_41:The API key's lifetime is the account's; rotate with the account's regenerate-key and this secret together (docs/ADMIN.md, Key rotation)
  parent: vault
  name: 'azure-openai-api-key'
  properties: {
    value: account.listKeys().key1
    contentType: 'text/plain'
  }
}

resource user 'Microsoft.Authorization/roleAssignments@2022-04-01' = {
  name: guid(account.id, userPrincipalId, '5e0bd9bd-7b93-4f28-af87-19fc36ad61bd')
  scope: account
  properties: {
    roleDefinitionId: subscriptionResourceId('Microsoft.Authorization/roleDefinitions', '5e0bd9bd-7b93-4f28-af87-19fc36ad61bd')
    principalId: userPrincipalId
    principalType: 'ServicePrincipal'
  }
}

output id string = account.id
output endpoint string = account.properties.endpoint
output model string = 'azure_openai:${chat.name}'
